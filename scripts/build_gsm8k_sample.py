"""Builds dspy_for/datasets/data/gsm8k_sample.jsonl: the project's own GSM8K-style problems.

Each problem is written by hand as a question plus worked steps; every step's value is computed here, so
the `#### N` answers are arithmetic, not typed. Run: python scripts/build_gsm8k_sample.py
"""

from __future__ import annotations

import json
from pathlib import Path

# (question, [(step text with {} for the value, python expression), ...]); the last step is the answer.
PROBLEMS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Mia buys 3 packs of pencils with 12 pencils in each pack. She gives 9 pencils to her brother. How many pencils does she have left?",
     [("She buys 3 * 12 = {} pencils.", "3*12"), ("After giving 9 away she has 36 - 9 = {} pencils.", "36-9")]),
    ("A bakery sells muffins for $2 each and cookies for $1 each. On Monday it sold 45 muffins and 80 cookies. How many dollars did it make?",
     [("Muffins bring 45 * 2 = {} dollars.", "45*2"), ("Cookies bring 80 * 1 = {} dollars.", "80*1"), ("In total 90 + 80 = {} dollars.", "90+80")]),
    ("Tom reads 15 pages every weekday and 30 pages on each day of the weekend. How many pages does he read in one week?",
     [("Weekdays: 5 * 15 = {} pages.", "5*15"), ("Weekend: 2 * 30 = {} pages.", "2*30"), ("Total: 75 + 60 = {} pages.", "75+60")]),
    ("A farmer has 24 cows. He buys 3 times as many sheep as cows. How many animals does he have now?",
     [("He buys 3 * 24 = {} sheep.", "3*24"), ("He has 24 + 72 = {} animals.", "24+72")]),
    ("Lena saves $25 a week. How many weeks does she need to save to buy a bike that costs $300?",
     [("She needs 300 / 25 = {} weeks.", "300//25")]),
    ("A train travels 60 miles per hour for 3 hours and then 40 miles per hour for 2 hours. How many miles does it travel?",
     [("First part: 60 * 3 = {} miles.", "60*3"), ("Second part: 40 * 2 = {} miles.", "40*2"), ("Total: 180 + 80 = {} miles.", "180+80")]),
    ("A class has 32 students. One quarter of them walk to school and the rest take the bus. How many take the bus?",
     [("Walkers: 32 / 4 = {}.", "32//4"), ("Bus riders: 32 - 8 = {}.", "32-8")]),
    ("Jake has 5 boxes of 24 crayons. He loses 17 crayons. How many crayons are left?",
     [("He has 5 * 24 = {} crayons.", "5*24"), ("After losing 17 he has 120 - 17 = {}.", "120-17")]),
    ("A shirt costs $40. It is on sale for 25% off. How much does the shirt cost on sale, in dollars?",
     [("The discount is 40 * 25 / 100 = {} dollars.", "40*25//100"), ("The sale price is 40 - 10 = {} dollars.", "40-10")]),
    ("Sara has twice as many stickers as Ben. Ben has 14 stickers. How many stickers do they have together?",
     [("Sara has 2 * 14 = {} stickers.", "2*14"), ("Together: 28 + 14 = {}.", "28+14")]),
    ("A garden has 6 rows of tomato plants with 8 plants per row. Each plant gives 5 tomatoes. How many tomatoes does the garden give?",
     [("There are 6 * 8 = {} plants.", "6*8"), ("They give 48 * 5 = {} tomatoes.", "48*5")]),
    ("Emma earns $12 per hour. She works 7 hours a day for 5 days. How much does she earn, in dollars?",
     [("She works 7 * 5 = {} hours.", "7*5"), ("She earns 35 * 12 = {} dollars.", "35*12")]),
    ("A pizza is cut into 8 slices. 5 friends each eat 3 slices. How many whole pizzas did they need to order at least?",
     [("They eat 5 * 3 = {} slices.", "5*3"), ("15 slices need 2 pizzas of 8 slices, since 8 * 2 = 16 >= 15. So {} pizzas.", "2")]),
    ("A store had 1,250 bottles of water. It sold 475 on Saturday and 390 on Sunday. How many bottles are left?",
     [("Sold: 475 + 390 = {} bottles.", "475+390"), ("Left: 1250 - 865 = {} bottles.", "1250-865")]),
    ("Noah runs 3 laps of a 400-meter track every morning. How many meters does he run in 10 mornings?",
     [("Each morning: 3 * 400 = {} meters.", "3*400"), ("In 10 mornings: 1200 * 10 = {} meters.", "1200*10")]),
    ("A library has 8 shelves with 45 books each. It lends out 67 books. How many books remain on the shelves?",
     [("Books: 8 * 45 = {}.", "8*45"), ("Remaining: 360 - 67 = {}.", "360-67")]),
    ("Olivia buys 4 notebooks at $3 each and 2 pens at $2 each. She pays with a $20 bill. How much change does she get, in dollars?",
     [("Notebooks: 4 * 3 = {} dollars.", "4*3"), ("Pens: 2 * 2 = {} dollars.", "2*2"), ("Change: 20 - 12 - 4 = {} dollars.", "20-12-4")]),
    ("A car uses 1 gallon of gas for every 30 miles. Gas costs $4 per gallon. How much does gas cost for a 240-mile trip, in dollars?",
     [("Gallons: 240 / 30 = {}.", "240//30"), ("Cost: 8 * 4 = {} dollars.", "8*4")]),
    ("There are 3 times as many red marbles as blue marbles in a jar, and 48 marbles in total. How many red marbles are there?",
     [("Red plus blue is 3 + 1 = {} parts.", "3+1"), ("One part is 48 / 4 = {} marbles.", "48//4"), ("Red: 3 * 12 = {} marbles.", "3*12")]),
    ("Liam is 12 years old. His father is 3 years older than 3 times Liam's age. How old is his father?",
     [("Three times Liam's age is 3 * 12 = {}.", "3*12"), ("His father is 36 + 3 = {} years old.", "36+3")]),
    ("A recipe needs 2 cups of flour for 12 cookies. How many cups of flour are needed for 60 cookies?",
     [("60 cookies are 60 / 12 = {} batches.", "60//12"), ("Flour: 5 * 2 = {} cups.", "5*2")]),
    ("A school bought 15 boxes of markers. Each box has 10 markers and costs $6. How much did one marker cost, in cents?",
     [("Each box costs 6 * 100 = {} cents.", "6*100"), ("One marker costs 600 / 10 = {} cents.", "600//10")]),
    ("Grace had $150. She spent one third of it on a jacket and $35 on shoes. How many dollars does she have left?",
     [("Jacket: 150 / 3 = {} dollars.", "150//3"), ("Left: 150 - 50 - 35 = {} dollars.", "150-50-35")]),
    ("A parking lot has 5 levels with 48 spaces each. 187 cars are parked. How many spaces are empty?",
     [("Spaces: 5 * 48 = {}.", "5*48"), ("Empty: 240 - 187 = {}.", "240-187")]),
    ("Ava plants 7 trees every day for 2 weeks. 9 of the trees die. How many trees are still alive?",
     [("Two weeks is 14 days, so she plants 7 * 14 = {} trees.", "7*14"), ("Alive: 98 - 9 = {}.", "98-9")]),
    ("A phone costs $600. Ethan pays $150 up front and the rest in 9 equal monthly payments. How much is each payment, in dollars?",
     [("Rest: 600 - 150 = {} dollars.", "600-150"), ("Each payment: 450 / 9 = {} dollars.", "450//9")]),
    ("In a basket there are 36 apples. Half are green, a third are red and the rest are yellow. How many apples are yellow?",
     [("Green: 36 / 2 = {}.", "36//2"), ("Red: 36 / 3 = {}.", "36//3"), ("Yellow: 36 - 18 - 12 = {}.", "36-18-12")]),
    ("A water tank holds 500 liters. It loses 15 liters a day to a leak and is filled with 40 liters every day. How many liters does it gain in a week?",
     [("Net gain per day: 40 - 15 = {} liters.", "40-15"), ("In 7 days: 25 * 7 = {} liters.", "25*7")]),
    ("Daniel scored 78, 85 and 92 on three tests. What score does he need on the fourth test to average 85?",
     [("For an average of 85 over 4 tests he needs 85 * 4 = {} points.", "85*4"), ("He has 78 + 85 + 92 = {} points.", "78+85+92"), ("He needs 340 - 255 = {} points.", "340-255")]),
    ("A box of 20 chocolates costs $8. How much do 150 chocolates cost, in dollars?",
     [("150 chocolates are 150 / 20 = 7.5 boxes, costing 7.5 * 8 = {} dollars.", "int(7.5*8)")]),
    ("Chloe walks 2 kilometers to school and back home every school day. How many kilometers does she walk in 4 weeks of 5 school days?",
     [("Each day: 2 * 2 = {} kilometers.", "2*2"), ("School days: 4 * 5 = {}.", "4*5"), ("Total: 4 * 20 = {} kilometers.", "4*20")]),
    ("A hotel has 120 rooms. 85% of the rooms are booked. How many rooms are free?",
     [("Booked: 120 * 85 / 100 = {} rooms.", "120*85//100"), ("Free: 120 - 102 = {} rooms.", "120-102")]),
    ("Henry collects 4 eggs from each of his 13 hens every week. He sells the eggs in cartons of 12. How many full cartons does he sell in 3 weeks?",
     [("Eggs per week: 4 * 13 = {}.", "4*13"), ("In 3 weeks: 52 * 3 = {} eggs.", "52*3"), ("Cartons: 156 / 12 = {}.", "156//12")]),
    ("A movie ticket costs $11 for adults and $7 for children. A family of 2 adults and 3 children goes to the movies. How much do they pay, in dollars?",
     [("Adults: 2 * 11 = {} dollars.", "2*11"), ("Children: 3 * 7 = {} dollars.", "3*7"), ("Total: 22 + 21 = {} dollars.", "22+21")]),
    ("Isabella types 45 words per minute. How many minutes does she need to type an essay of 1,800 words?",
     [("Minutes: 1800 / 45 = {}.", "1800//45")]),
    ("A rope is 84 meters long. It is cut into pieces of 6 meters, and 3 pieces are thrown away. How many pieces are kept?",
     [("Pieces: 84 / 6 = {}.", "84//6"), ("Kept: 14 - 3 = {}.", "14-3")]),
    ("Mason buys 3 kilograms of apples at $2 per kilogram and 2 kilograms of grapes at $5 per kilogram. He has a coupon for $3 off. How much does he pay, in dollars?",
     [("Apples: 3 * 2 = {} dollars.", "3*2"), ("Grapes: 2 * 5 = {} dollars.", "2*5"), ("With the coupon: 6 + 10 - 3 = {} dollars.", "6+10-3")]),
    ("A bus carries 42 passengers. At the first stop 13 get off and 8 get on. At the second stop 19 get off. How many passengers are on the bus now?",
     [("After the first stop: 42 - 13 + 8 = {}.", "42-13+8"), ("After the second stop: 37 - 19 = {}.", "37-19")]),
    ("A company had 2,400 employees. It hired 15% more employees this year. How many employees does it have now?",
     [("New hires: 2400 * 15 / 100 = {}.", "2400*15//100"), ("Now: 2400 + 360 = {}.", "2400+360")]),
    ("Zoe has 3 dogs. Each dog eats 250 grams of food a day. A bag holds 15 kilograms of food. How many days does one bag last?",
     [("The dogs eat 3 * 250 = {} grams a day.", "3*250"), ("A bag holds 15 * 1000 = {} grams.", "15*1000"), ("It lasts 15000 / 750 = {} days.", "15000//750")]),
    ("A field is 50 meters long and 30 meters wide. A fence goes around it with a post every 5 meters. How many posts are needed?",
     [("The perimeter is 2 * (50 + 30) = {} meters.", "2*(50+30)"), ("Posts: 160 / 5 = {}.", "160//5")]),
    ("Lucas is saving for a $90 game. He has $18 and earns $8 each week doing chores. How many weeks until he can buy the game?",
     [("He still needs 90 - 18 = {} dollars.", "90-18"), ("Weeks: 72 / 8 = {}.", "72//8")]),
    ("A printer prints 24 pages per minute. How many pages does it print between 9:15 and 9:40?",
     [("From 9:15 to 9:40 is {} minutes.", "40-15"), ("Pages: 25 * 24 = {}.", "25*24")]),
    ("The temperature was -4 degrees at 6 am and rose 3 degrees every hour. What was the temperature at 11 am, in degrees?",
     [("From 6 am to 11 am is {} hours.", "11-6"), ("It rose 5 * 3 = {} degrees.", "5*3"), ("The temperature was -4 + 15 = {} degrees.", "-4+15")]),
    ("A jar has 3/4 liter of juice. Ella pours out glasses of 1/8 liter. How many glasses can she fill?",
     [("Glasses: (3/4) / (1/8) = {}.", "int((3/4)/(1/8))")]),
]


def build() -> list[dict[str, str]]:
    rows = []
    for question, steps in PROBLEMS:
        lines, value = [], None
        for text, expr in steps:
            value = eval(expr)
            lines.append(text.format(value))
        assert isinstance(value, int), (question, value)
        rows.append({"question": question, "answer": "\n".join(lines) + f"\n#### {value}"})
    return rows


if __name__ == "__main__":
    out = Path(__file__).resolve().parent.parent / "dspy_for" / "datasets" / "data" / "gsm8k_sample.jsonl"
    rows = build()
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} problems to {out}")
